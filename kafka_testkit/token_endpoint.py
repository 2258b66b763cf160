"""A throwaway OAuth token endpoint on loopback, for OAUTHBEARER clients in tests.

It answers the client credentials grant (``POST``, client id and secret in HTTP Basic
authentication, as librdkafka's ``sasl.oauthbearer.method=oidc`` sends them) with an unsigned JWT
(``alg: none``) whose subject is the client id. Only brokers with Kafka's unsecured JWT validator
accept such tokens (``SecuredKafkaBroker(oauth_listener=True)``). Requests are recorded.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

_HOST = "127.0.0.1"


def unsecured_jwt(subject: str, lifetime_s: int = 3600) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now, 'exp': now + lifetime_s})}."


class TokenEndpoint:
    """``url`` takes token requests while started (a context manager)."""

    def __init__(self, lifetime_s: int = 3600) -> None:
        self.lifetime_s = lifetime_s
        #: (client id, form fields) of every request.
        self.requests: list[tuple[str, dict[str, str]]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                form = dict(urllib.parse.parse_qsl(self.rfile.read(int(self.headers["Content-Length"])).decode()))
                scheme, _, credentials = (self.headers.get("Authorization") or "").partition(" ")
                client_id = base64.b64decode(credentials).decode().partition(":")[0] if scheme == "Basic" else ""
                endpoint.requests.append((client_id, form))
                if not client_id or form.get("grant_type") != "client_credentials":
                    self.send_error(400, "client credentials grant with HTTP Basic authentication expected")
                    return
                body = json.dumps({"access_token": unsecured_jwt(client_id, endpoint.lifetime_s),
                                   "token_type": "bearer", "expires_in": endpoint.lifetime_s}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer((_HOST, 0), Handler)
        self.url = f"http://{_HOST}:{self._server.server_port}/token"
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        self._thread = threading.Thread(target=self._server.serve_forever, name="token-endpoint", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "TokenEndpoint":
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
