#!/usr/bin/env bash
# Regenerates the committed protobuf and Connect code. Needs protoc
# (Debian: protobuf-compiler) and, on PATH:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
#   go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.0
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$(go env GOPATH)/bin"
protoc -I api -I /usr/include \
  --go_out=. --go_opt=module=github.com/tenurehq/tenure \
  --connect-go_out=. --connect-go_opt=module=github.com/tenurehq/tenure \
  --go-vtproto_out=. --go-vtproto_opt=module=github.com/tenurehq/tenure,features=marshal+unmarshal+size \
  api/tenure/v1/*.proto
# The API's messages also get generated encoding (*_vtproto.pb.go), which
# internal/wire.Codec uses. Its UnmarshalVT takes string fields as they
# come; proto3 (and protobuf-go) refuse invalid UTF-8 in them, and so must
# we: check every string before it is kept.
for f in api/tenure/v1/*_vtproto.pb.go; do
  perl -0pi -e '
    s{^(\s*)(.*?)string\(dAtA\[iNdEx:(\w+)\]\)}{$1if !utf8.Valid(dAtA[iNdEx:$3]) {\n$1\treturn fmt.Errorf("proto: string field contains invalid UTF-8")\n$1}\n$1$2string(dAtA[iNdEx:$3])}mg;
    s{^import \(\n}{import (\n\tutf8 "unicode/utf8"\n}m;
  ' "$f"
  gofmt -w "$f"
done
protoc -I api -I internal/logpb -I /usr/include \
  --go_out=. --go_opt=module=github.com/tenurehq/tenure \
  internal/logpb/*.proto
