#!/bin/bash
printf '#!/bin/bash\necho "Hello, $(cat /app/name.txt)!"\n' > /app/greet.sh
chmod +x /app/greet.sh
