"""Test-only TLS material and a recording TLS front for a Kafka-protocol broker.

``make_pki`` writes a CA, a server certificate for 127.0.0.1 and a client certificate with the
``openssl`` command, with the extensions RFC 5280 asks for (the CA's keyUsage, key identifiers,
the leaves' extendedKeyUsage): Python 3.13's default context refuses a chain without them
(VERIFY_X509_STRICT). ``key_usage=False`` leaves the CA's keyUsage out, like many private CAs. ``TlsFront`` terminates TLS (requiring a client certificate signed by the
CA) on a loopback port, forwards the bytes to a real broker, and records what the client sent
and which client certificate it presented.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


#: OpenSSL extension sections for the test PKI.
PKI_CONFIG = """\
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[ca_without_key_usage]
basicConstraints = critical, CA:TRUE
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


def make_pki(folder: Path, *, key_usage: bool = True) -> Pki:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)

    (folder / "pki.cnf").write_text(PKI_CONFIG)
    run(
        "req",
        "-config",
        "pki.cnf",
        "-extensions",
        "ca" if key_usage else "ca_without_key_usage",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=tickerwire-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    )
    for name, cn in (("server", "localhost"), ("client", "tickerwire-test-client")):
        run(
            "req",
            "-config",
            "pki.cnf",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={cn}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
        )
        run(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            f"{name}.pem",
            "-extfile",
            "pki.cnf",
            "-extensions",
            name,
        )
    return Pki(
        folder / "ca.pem", folder / "server.pem", folder / "server.key", folder / "client.pem", folder / "client.key"
    )


@dataclass
class TlsFront:
    pki: Pki
    upstream: str  # host:port of the real broker
    received: bytearray = field(default_factory=bytearray)
    client_subjects: list[str] = field(default_factory=list)
    port: int = 0
    _server: asyncio.base_events.Server | None = None

    async def __aenter__(self) -> "TlsFront":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.pki.server_cert), str(self.pki.server_key))
        context.verify_mode = ssl.CERT_REQUIRED
        # A broker is not Python: its check of the client is not Python 3.13's strict X.509 one.
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert") or {}
        self.client_subjects.append(dict(x[0] for x in peer.get("subject", ())).get("commonName", ""))
        host, port = self.upstream.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, record: bool) -> None:
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                while data := await src.read(65536):
                    if record:
                        self.received.extend(data)
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        await asyncio.wait_for(
            asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False), return_exceptions=True), 30
        )
