"""spark-submit entry point: ``spark-submit jobs/backfill_job.py run conf/backfills/NAME.yml``.

Takes the same arguments as the ``backfill`` command. The platform's SparkSession (spark-submit, Databricks,
EMR) is reused; no logic lives here.
"""

import sys

from backfill_lib.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
