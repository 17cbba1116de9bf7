"""A TLS-terminating TCP proxy in front of the Temporal dev server, which cannot serve TLS itself
(`temporal server start-dev` has no TLS flags). It optionally requires a client certificate (mTLS), and it reads the
gRPC request headers (HTTP/2 HEADERS frames, HPACK-decoded) going to the server, so a test can see the
`authorization` metadata a client really sent.

Runs its own asyncio loop in a thread: the tests around it block in time.sleep-style waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

import hpack
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS, CONTINUATION = 0x1, 0x9
END_HEADERS, PADDED, PRIORITY = 0x4, 0x8, 0x20
SERVER_NAME = "temporal.test"  # the only name in the server certificate: clients must be told it


# --- certificates ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


class Authority:
    """A throw-away CA writing PEM files under `directory`."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
        self.cert_pem = self._builder(self.subject, self.key).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True
        ).add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False), critical=True
        ).sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = directory / f"{name}-ca.crt"
        self.ca.write_bytes(self.cert_pem)

    def _builder(self, subject: x509.Name, key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(self.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1)))

    def issue(self, common_name: str, *, server: bool) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = self._builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]), key)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(common_name)]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        issued = Issued(self.directory / f"{self.name}-{common_name}.crt", self.directory / f"{self.name}-{common_name}.key")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        issued.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
        issued.key.chmod(0o600)
        return issued


# --- HTTP/2 request headers ------------------------------------------------------------------------------------------
@dataclass
class HeaderSniffer:
    """Feeds on the client-to-server byte stream of one connection and collects each request's headers."""

    seen: list[dict[str, str]]
    buffer: bytes = b""
    preface_done: bool = False
    block: bytes = b""
    decoder: hpack.Decoder = field(default_factory=hpack.Decoder)

    def feed(self, data: bytes) -> None:
        self.buffer += data
        if not self.preface_done:
            if len(self.buffer) < len(PREFACE):
                return
            assert self.buffer.startswith(PREFACE), "not HTTP/2 (no client preface)"
            self.buffer, self.preface_done = self.buffer[len(PREFACE):], True
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + length:
                return
            kind, flags, payload = self.buffer[3], self.buffer[4], self.buffer[9:9 + length]
            self.buffer = self.buffer[9 + length:]
            if kind == HEADERS:
                pad = payload[0] if flags & PADDED else 0
                payload = payload[1:] if flags & PADDED else payload
                payload = payload[5:] if flags & PRIORITY else payload
                self.block = payload[:len(payload) - pad]
            elif kind == CONTINUATION:
                self.block += payload
            else:
                continue
            if flags & END_HEADERS:
                self.seen.append({str(k): str(v) for k, v in self.decoder.decode(self.block, raw=False)})
                self.block = b""


# --- the proxy -------------------------------------------------------------------------------------------------------
class TlsProxy:
    def __init__(self, upstream: str, server: Issued, *, client_ca: Path | None = None) -> None:
        self.upstream_host, port = upstream.rsplit(":", 1)
        self.upstream_port = int(port)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(server.cert, server.key)
        self.context.set_alpn_protocols(["h2"])  # gRPC is HTTP/2
        if client_ca is not None:  # mTLS: no handshake without a certificate from this CA
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(client_ca)
        self.requests: list[dict[str, str]] = []
        self.errors: list[str] = []
        self.connections = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-proxy", daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def authorizations(self) -> set[str]:
        return {h["authorization"] for h in list(self.requests) if "authorization" in h}

    def start(self) -> TlsProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.context), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        sniffer = HeaderSniffer(self.requests)
        try:
            up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError:
            writer.close()
            return

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, sniff: bool) -> None:
            with contextlib.suppress(ConnectionError, asyncio.CancelledError, ssl.SSLError):
                while data := await src.read(65536):
                    if sniff:
                        try:
                            sniffer.feed(data)
                        except Exception as exc:  # not what a gRPC client sends: keep proxying, note it
                            self.errors.append(f"{type(exc).__name__}: {exc}")
                            sniff = False
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))
