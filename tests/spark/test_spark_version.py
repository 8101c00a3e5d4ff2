import pyspark


def test_running_jvm_is_the_imported_pyspark(spark):
    assert spark.version == pyspark.__version__
