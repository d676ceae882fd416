#!/usr/bin/env bash
# The Debian packages Parley runs with (`make install` calls this; CI's clean machine too):
#   chromium, fonts-dejavu-core  the browser tests (Playwright drives it; never `playwright install`)
#   tesseract-ocr(-eng)          OCR of pages without a text layer (documents/extract.py)
#   clamav                       the upload scanner's `clamscan` (signatures: documents/signatures/)
#   haproxy                      `parley edge`: the proxy in front of sharded gateways (edge/config.py writes its config)
#   curl                         the edge's tests speak HTTP/2 through it (tests/unit/edge/test_config.py)
# Idempotent: installs only what is missing.
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium fonts-dejavu-core)
[ -x /usr/bin/tesseract ] || missing+=(tesseract-ocr tesseract-ocr-eng)
[ -x /usr/bin/clamscan ] || missing+=(clamav)
[ -x /usr/sbin/haproxy ] || missing+=(haproxy)
[ -x /usr/bin/curl ] || missing+=(curl)
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
test -x /usr/bin/chromium && test -x /usr/bin/tesseract && test -x /usr/bin/clamscan && test -x /usr/sbin/haproxy && test -x /usr/bin/curl
