#!/usr/bin/env bash
# Makes a test CA and the certificates ropeserve's TLS flags take, with the
# openssl CLI (Debian: openssl), for trying TLS, mutual TLS and tokens on one
# machine (docs/operations.md, "Security"). Not for production: use your
# organisation's CA (or cert-manager in Kubernetes).
#
#   scripts/make_test_certs.sh [DIR] [NAME...]
#
# DIR (default: certs) gets
#   ca.pem, ca.key            a self-signed CA (EC P-256)
#   server.pem, server.key    signed by it; subjectAltName: localhost, 127.0.0.1,
#                             ::1, this host's name, and each NAME given (a DNS
#                             name, or an IP address)
#   client.pem, client.key    signed by it, for mutual TLS (clientAuth)
#   token                     a random bearer token; tokens: the same, as
#                             --auth_token_file reads it
# valid for DAYS (default 30) days. An existing DIR's files are replaced.
set -euo pipefail
dir=${1:-certs}
shift || true
days=${DAYS:-30}
command -v openssl >/dev/null || { echo "make_test_certs.sh: needs the openssl CLI (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$dir"
umask 077

sans="DNS:localhost,IP:127.0.0.1,IP:::1"
host=$(hostname 2>/dev/null || true)
[ -n "$host" ] && [ "$host" != localhost ] && sans+=",DNS:$host"
for name in "$@"; do
  if [[ $name =~ ^[0-9.]+$ || $name == *:* ]]; then sans+=",IP:$name"; else sans+=",DNS:$name"; fi
done

newkey=(req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl "${newkey[@]}" -x509 -days "$days" -subj "/CN=ropeserve test CA" \
  -keyout "$dir/ca.key" -out "$dir/ca.pem" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null

leaf() {  # leaf NAME SUBJECT EXTENSIONS
  printf '%b\n' "$3" > "$dir/$1.ext"
  openssl "${newkey[@]}" -subj "/CN=$2" -keyout "$dir/$1.key" -out "$dir/$1.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$1.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days "$days" -extfile "$dir/$1.ext" -out "$dir/$1.pem" 2>/dev/null
  rm -f "$dir/$1.csr" "$dir/$1.ext"
}
leaf server "ropeserve" "subjectAltName=$sans\nextendedKeyUsage=serverAuth"
leaf client "ropeserve test client" "extendedKeyUsage=clientAuth"
rm -f "$dir/ca.srl"

openssl rand -hex 24 > "$dir/token"
{ echo "# bearer tokens ropeserve accepts (--auth_token_file), one per line"; cat "$dir/token"; } > "$dir/tokens"
echo "make_test_certs.sh: wrote $dir/{ca,server,client}.{pem,key}, $dir/token and $dir/tokens" \
     "(server names: $sans; valid $days days)"
