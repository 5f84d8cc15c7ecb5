#!/usr/bin/env bash
# EMR bootstrap action (runs on every node before applications start): a Python 3.11 virtual environment with
# the delta-backfill wheel and its dependencies at /opt/delta-backfill/venv, and the project files (jobs/,
# conf/, expectations/) at /opt/delta-backfill/project, which conf/cluster/emr_step.json names.
#
#   aws emr create-cluster ... \
#     --bootstrap-actions Path=s3://BUCKET/delta-backfill/emr_bootstrap.sh,Args=[s3://BUCKET/delta-backfill]
#   (a second argument names the Python 3.11 interpreter, default python3.11)
#
# s3://BUCKET/delta-backfill holds the wheel (`python -m build` writes dist/delta_backfill-0.1.0-py3-none-any.whl)
# and project.tar.gz (`tar czf project.tar.gz jobs conf expectations` from the project root).
# The package requires Python 3.11 (pyproject.toml requires-python).
# Bootstrap actions: https://docs.aws.amazon.com/emr/latest/ManagementGuide/emr-plan-bootstrap.html
set -euo pipefail
SRC=${1:?usage: emr_bootstrap.sh s3://BUCKET/delta-backfill [PYTHON]}
PYTHON=${2:-python3.11}

sudo mkdir -p /opt/delta-backfill/project
sudo chown -R "$(id -u):$(id -g)" /opt/delta-backfill
aws s3 cp "$SRC/delta_backfill-0.1.0-py3-none-any.whl" /tmp/
aws s3 cp "$SRC/project.tar.gz" /tmp/
tar xzf /tmp/project.tar.gz -C /opt/delta-backfill/project
"$PYTHON" -m venv /opt/delta-backfill/venv
/opt/delta-backfill/venv/bin/pip install /tmp/delta_backfill-0.1.0-py3-none-any.whl
