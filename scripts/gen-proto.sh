#!/usr/bin/env bash
# Regenerates the committed protobuf and Connect code. Needs protoc
# (Debian: protobuf-compiler) and, on PATH:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$(go env GOPATH)/bin"
protoc -I api -I /usr/include \
  --go_out=. --go_opt=module=github.com/tenurehq/tenure \
  --connect-go_out=. --connect-go_opt=module=github.com/tenurehq/tenure \
  api/tenure/v1/*.proto
protoc -I api -I internal/logpb -I /usr/include \
  --go_out=. --go_opt=module=github.com/tenurehq/tenure \
  internal/logpb/*.proto
