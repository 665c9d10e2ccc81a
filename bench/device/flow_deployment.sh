#!/usr/bin/env bash
# The deployments of prefect.yaml against a local Prefect server (127.0.0.1 only), `smoke` run once by a local
# process worker; prints what the API shows (flow run, task runs, the summary artifact) and the DVC experiment.
# Everything happens in a temporary copy of this repository; the server is stopped at the end.
#   bash bench/device/flow_deployment.sh [PORT]        (with the project's virtual environment active)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PORT=${1:-4299}
D=$(mktemp -d -t flow-deploy-XXXX)
mkdir -p "$D/repo"
cd "$ROOT"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -f "$f" ] && mkdir -p "$D/repo/$(dirname "$f")" && cp "$f" "$D/repo/$f"; done
cd "$D/repo" && git init -q -b main && git add -A && git -c user.name=deploy -c user.email=deploy@localhost commit -qm deploy
export PREFECT_HOME=$D/prefect-home PREFECT_API_URL=http://127.0.0.1:$PORT/api PREFECT_SERVER_ANALYTICS_ENABLED=false
export MLFLOW_TRACKING_URI=sqlite:///$D/repo/mlflow.db
prefect server start --host 127.0.0.1 --port "$PORT" --background > "$D/server.log" 2>&1
trap 'prefect server stop >/dev/null 2>&1' EXIT
for i in $(seq 1 150); do curl -sf "http://127.0.0.1:$PORT/api/health" >/dev/null && break; sleep 2; done
prefect work-pool create cpu --type process >/dev/null
prefect work-pool create gpu --type process >/dev/null
BERT_PIPELINE_DIR=$D/repo prefect --no-prompt deploy --all > "$D/deploy.log" 2>&1 || { tail -30 "$D/deploy.log"; exit 1; }
prefect deployment run bert-pipeline/smoke > /dev/null
start=$(date +%s)
timeout 1500 prefect worker start --pool cpu --run-once > "$D/worker.log" 2>&1
rc=$?
echo "worker ran the smoke flow run in $(( $(date +%s) - start )) s (exit $rc); logs in $D"
python - <<'PY'
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

with get_client(sync_client=True) as client:
    for dep in client.read_deployments():
        sched = [s.schedule for s in dep.schedules]
        print(f"deployment {dep.name}: pool {dep.work_pool_name}, parameters {dep.parameters}, schedules {sched}")
    for run in client.read_flow_runs():
        if run.state.is_scheduled():
            continue
        print(f"flow run {run.name}: {run.state.name}, parameters {run.parameters}")
        for t in client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id]))):
            print(f"  task run {t.name}: {t.state.name}")
    for artifact in client.read_artifacts():
        print(f"artifact {artifact.key} ({artifact.type}):\n{artifact.data}")
PY
python -m dvc exp list 2>&1 | head -5
