-- A small shop database for the `sql-basic` env. Built into a SQLite file on first use.
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, joined_year INTEGER NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price REAL NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), product_id INTEGER NOT NULL REFERENCES products(id), quantity INTEGER NOT NULL, order_year INTEGER NOT NULL);
INSERT INTO customers VALUES
 (1,'Ada','London',2019),(2,'Grace','New York',2020),(3,'Alan','London',2021),(4,'Edsger','Amsterdam',2019),
 (5,'Barbara','Boston',2022),(6,'Donald','Stanford',2020),(7,'Frances','New York',2023),(8,'Leslie','Boston',2021);
INSERT INTO products VALUES
 (1,'Keyboard','hardware',45.0),(2,'Mouse','hardware',20.0),(3,'Monitor','hardware',180.0),(4,'Compiler Book','books',60.0),
 (5,'Algorithms Book','books',85.0),(6,'Editor License','software',120.0),(7,'Database License','software',300.0);
INSERT INTO orders VALUES
 (1,1,1,2,2021),(2,1,4,1,2021),(3,2,3,1,2022),(4,2,2,3,2022),(5,3,5,2,2022),(6,4,6,1,2021),(7,4,7,1,2023),
 (8,5,1,1,2023),(9,5,2,2,2023),(10,6,5,1,2020),(11,6,4,2,2021),(12,7,3,2,2023),(13,8,6,1,2022),(14,8,2,1,2022),
 (15,3,7,1,2023),(16,1,3,1,2023);
