"""One local Spark session for the analytics tests (2 cores, UI off, loopback only)."""

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need the venv's pyarrow and console
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from console.analytics.source import JetStreamDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("batch-console-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.dataSource.register(JetStreamDataSource)
    yield session
    session.stop()
