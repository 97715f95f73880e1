"""The database: the embedded PostgreSQL or a DSN, migrations, named SQL, and the store."""
