"""PySpark: the jetstream data source, pure transforms, and the job that keeps the history."""
