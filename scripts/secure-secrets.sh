#!/usr/bin/env bash
# Writes the secrets of the secure example deployment (docker/secure.yml) into docker/secrets/:
#   ca.pem, ca.key             a private CA (ECDSA P-256, 10 years) that signs the agents' certificates
#   provider.pem, provider.key the provider's certificate, for the names provider and localhost
#   requester.pem, requester.key the requester's certificate (mutual TLS is not required; kept for it)
#   requester-token             the requester's API key, which the provider's peers file names
# Files already there are kept (--force makes new ones). Needs openssl.
#
# Usage: scripts/secure-secrets.sh [--force] [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
force=0
dir=docker/secrets
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h | --help)
      sed -n '2,9p' "$0"
      exit 0
      ;;
    -*)
      echo "secure-secrets: unknown option $arg" >&2
      exit 2
      ;;
    *) dir=$arg ;;
  esac
done
command -v openssl >/dev/null || {
  echo "secure-secrets: openssl is needed" >&2
  exit 1
}
mkdir -p "$dir"
chmod 700 "$dir"
if ((force == 0)) && [[ -f "$dir/ca.pem" && -f "$dir/requester-token" ]]; then
  echo "secure-secrets: $dir has its secrets already (--force makes new ones)"
  exit 0
fi

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
key "$dir/ca.key"
openssl req -x509 -new -key "$dir/ca.key" -days 3650 -subj "/CN=Parley example CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out "$dir/ca.pem" 2>/dev/null
cert() {
  local name=$1 usage=$2
  key "$dir/$name.key"
  openssl req -new -key "$dir/$name.key" -subj "/CN=$name" -out "$dir/$name.csr" 2>/dev/null
  printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=%s\nbasicConstraints=CA:FALSE\n' \
    "$name" "$usage" >"$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 825 -extfile "$dir/$name.ext" -out "$dir/$name.pem" 2>/dev/null
  rm -f "$dir/$name.csr" "$dir/$name.ext"
}
cert provider serverAuth
cert requester clientAuth
# An API key in Parley's form: parley_<16 hex digits>_<32 random bytes, base64url>.
printf 'parley_%s_%s\n' "$(openssl rand -hex 8)" \
  "$(openssl rand 32 | openssl base64 -A | tr '+/' '-_' | tr -d '=')" >"$dir/requester-token"
# The containers run as an unprivileged user; compose bind-mounts these files as they are.
chmod 644 "$dir"/*.pem "$dir"/*.key "$dir/requester-token"
rm -f "$dir/ca.srl"
echo "secure-secrets: wrote $(ls "$dir" | tr '\n' ' ')to $dir"
