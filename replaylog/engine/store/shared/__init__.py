"""What the SQLite and PostgreSQL stores share: written once, spoken by both."""
