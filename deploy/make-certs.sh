#!/usr/bin/env bash
# Certificates and keys for a local trial of a secure deployment (TLS + SuperNode authentication).
#
#   deploy/make-certs.sh OUTDIR [N_DEVICES]
#
# writes into OUTDIR:
#   ca.crt, ca.key                    a private certificate authority (keep ca.key off the SuperLink)
#   server.crt, server.key, server.csr  the SuperLink's TLS certificate, signed by the CA, valid for
#                                     127.0.0.1 and localhost (add more names with SUPERLINK_SANS,
#                                     e.g. SUPERLINK_SANS="IP:127.0.0.1,DNS:localhost,DNS:link.lab")
#   device-<i>, device-<i>.pub        one ECDSA P-384 key pair per device (i = 0 .. N_DEVICES-1, default
#                                     2), in OpenSSH format: the format `flower-supernode
#                                     --auth-supernode-private-key` and `flwr supernode register` read
#
# SuperNodes verify the SuperLink with ca.crt (`--root-certificates`); each device keeps its private
# key, and its public key is registered on the SuperLink before it may join. Self-signed: for trials
# and closed networks; a real deployment uses certificates from the organisation's own CA.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 OUTDIR [N_DEVICES]" >&2
  exit 2
fi
out=$1
devices=${2:-2}
sans=${SUPERLINK_SANS:-IP:127.0.0.1,DNS:localhost}
days=${CERT_DAYS:-365}
if ! [[ $devices =~ ^[0-9]+$ ]]; then
  echo "N_DEVICES must be a number, got '$devices'" >&2
  exit 2
fi
command -v openssl >/dev/null || { echo "openssl is required" >&2; exit 1; }

mkdir -p "$out"
cd "$out"
umask 077  # private keys readable by their owner only

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-384 -sha256 -nodes -days "$days" \
  -keyout ca.key -out ca.crt -subj "/CN=pfedgm-local-ca" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-384 -sha256 -nodes \
  -keyout server.key -out server.csr -subj "/CN=pfedgm-superlink" 2>/dev/null
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
  -days "$days" -out server.crt \
  -extfile <(printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' "$sans") \
  2>/dev/null
chmod 644 ca.crt server.crt

for ((i = 0; i < devices; i++)); do
  rm -f "device-$i" "device-$i.pub"
  if command -v ssh-keygen >/dev/null; then
    ssh-keygen -q -t ecdsa -b 384 -N "" -C "device-$i" -f "device-$i"
  else  # the same key pair through Python's `cryptography` (a dependency of flwr)
    python3 - "device-$i" <<'PY'
import sys
from cryptography.hazmat.primitives import serialization as s
from cryptography.hazmat.primitives.asymmetric import ec

key = ec.generate_private_key(ec.SECP384R1())
path = sys.argv[1]
open(path, "wb").write(key.private_bytes(s.Encoding.PEM, s.PrivateFormat.OpenSSH, s.NoEncryption()))
pub = key.public_key().public_bytes(s.Encoding.OpenSSH, s.PublicFormat.OpenSSH)
open(path + ".pub", "wb").write(pub + b" " + path.encode() + b"\n")
PY
  fi
  chmod 644 "device-$i.pub"
done

echo "wrote CA, SuperLink certificate ($sans) and $devices device key pair(s) to $(pwd)"
