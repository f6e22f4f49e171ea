#!/usr/bin/env bash
# Epochs from a local S3-compatible server against the same epochs from local disk.
#
# Creates a Python virtual environment with moto's S3 server and boto3 (once, reused), writes
# the `block_shuffle` example's 660-file dataset, starts the server on 127.0.0.1, uploads the
# dataset, runs sequential and block-shuffled epochs from s3:// and from disk with the same seed
# (the `object_store` example), and stops the server, whatever happens.
#
# Usage: benches/object_store/run.sh [--json PATH] [other options of the object_store example]
# Environment:
#   SERVER=moto (default: moto_server, Python, in-memory) or SERVER=s3s-fs (s3s-fs 0.14.1, a
#     Rust S3 server over a directory, installed once with `cargo install` into
#     ~/.cache/kiln-tools);
#   KILN_BENCH_VENV (the virtual environment; default ~/.cache/kiln-object-store-venv);
#   KILN_BENCH_DATA (where the dataset is written; default a temporary directory); FILES, ROWS.
set -euo pipefail

cd "$(dirname "$0")/../.."
venv="${KILN_BENCH_VENV:-$HOME/.cache/kiln-object-store-venv}"
server="${SERVER:-moto}"
tools="$HOME/.cache/kiln-tools"
files="${FILES:-660}"
rows="${ROWS:-900000}"
workdir=$(mktemp -d)
data="${KILN_BENCH_DATA:-$workdir/data}"
server_pid=""

cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT INT TERM

if [ ! -x "$venv/bin/moto_server" ]; then
  echo "==> creating $venv with moto's S3 server"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'moto[server]' boto3
fi

echo "==> building the object_store example"
cargo build --release --locked --example object_store

echo "==> writing $files files, $rows rows to $data"
target="${CARGO_TARGET_DIR:-target}/release/examples/object_store"
"$target" --dir "$data" --write --files "$files" --rows "$rows"

port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
endpoint="http://127.0.0.1:$port"
export AWS_ACCESS_KEY_ID=kiln-bench AWS_SECRET_ACCESS_KEY=kiln-bench AWS_REGION=us-east-1
case "$server" in
  moto)
    echo "==> starting moto_server on $endpoint"
    "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$workdir/server.log" 2>&1 &
    ;;
  s3s-fs)
    if [ ! -x "$tools/bin/s3s-fs" ]; then
      echo "==> installing s3s-fs into $tools"
      cargo install --quiet --locked s3s-fs@0.14.1 --features binary --root "$tools"
    fi
    mkdir -p "$workdir/store"
    echo "==> starting s3s-fs on $endpoint"
    "$tools/bin/s3s-fs" --host 127.0.0.1 --port "$port" --access-key "$AWS_ACCESS_KEY_ID" \
      --secret-key "$AWS_SECRET_ACCESS_KEY" "$workdir/store" >"$workdir/server.log" 2>&1 &
    ;;
  *)
    echo "SERVER must be moto or s3s-fs, not $server" >&2
    exit 2
    ;;
esac
server_pid=$!
# Up when it accepts connections (any HTTP answer will do), for at most 30 s.
ready=""
for _ in $(seq 1 150); do
  if "$venv/bin/python" -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.2
done
if [ -z "$ready" ]; then
  echo "the $server server did not start; its log:" >&2
  cat "$workdir/server.log" >&2
  exit 1
fi
echo "==> uploading to s3://kiln-bench/data/"
"$venv/bin/python" - "$endpoint" "$data" <<'PY'
import os, sys
import boto3

endpoint, data = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=endpoint)
s3.create_bucket(Bucket="kiln-bench")
names = sorted(name for name in os.listdir(data) if name.endswith(".parquet"))
for name in names:
    s3.upload_file(os.path.join(data, name), "kiln-bench", f"data/{name}")
print(f"uploaded {len(names)} files")
PY

echo "==> epochs from s3:// ($server) and from disk"
"$target" --dir "$data" --url s3://kiln-bench/data/ \
  --store-option "aws_endpoint=$endpoint" --store-option aws_allow_http=true "$@"
