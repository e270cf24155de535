"""Throw-away certificates for TLS tests, made with the openssl CLI (no key is committed).

    from throwaway_pki import make_certs
    make_certs(directory)   # ca, server (localhost, 127.0.0.1), client, outsider

writes, each as NAME.pem + NAME.key: "ca" and "other_ca" (self-signed CAs),
"server" (signed by ca, for localhost and 127.0.0.1), "client" (signed by
ca, clientAuth) and "outsider" (a client certificate of other_ca). Valid for
two days, EC P-256.
"""

import subprocess

OPENSSL_TIMEOUT_S = 60


def openssl(*args):
    result = subprocess.run(["openssl"] + list(args), capture_output=True, text=True,
                            timeout=OPENSSL_TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (" ".join(args), result.stderr))


def make_certs(d):
    """Writes the certificates above into directory d (which must exist)."""
    newkey = ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other_ca"):
        openssl(*newkey, "-x509", "-days", "2", "-subj", "/CN=" + ca, "-keyout", d + "/%s.key" % ca,
                "-out", d + "/%s.pem" % ca, "-addext", "basicConstraints=critical,CA:TRUE")
    leaves = [("server", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
              ("client", "ca", "extendedKeyUsage=clientAuth"),
              ("outsider", "other_ca", "extendedKeyUsage=clientAuth")]
    for name, ca, ext in leaves:
        with open(d + "/%s.ext" % name, "w") as f:
            f.write(ext + "\n")
        openssl(*newkey, "-subj", "/CN=" + name, "-keyout", d + "/%s.key" % name,
                "-out", d + "/%s.csr" % name)
        openssl("x509", "-req", "-in", d + "/%s.csr" % name, "-CA", d + "/%s.pem" % ca,
                "-CAkey", d + "/%s.key" % ca, "-CAcreateserial", "-days", "2",
                "-extfile", d + "/%s.ext" % name, "-out", d + "/%s.pem" % name)
