#!/bin/bash
sed -i 's/^port = 5000$/port = 8080/; s/^debug = true$/debug = false/' /app/server.ini
printf '\n[cache]\nttl = 300\n' >> /app/server.ini
