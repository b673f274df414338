"""Serving tables in SQLite (sqlmodel) and history in Delta (deltalake)."""
