#!/usr/bin/env python3
"""cdp-screenshot.py PORT OUT.png — screenshots the first page of a chromium
started with --remote-debugging-port=PORT, over the DevTools protocol
(Page.captureScreenshot). Used by ui-screenshot.sh for pages that never go
idle (the Temporal web UI long-polls a running workflow's history, so
chromium's --screenshot with --virtual-time-budget waits for ever).
Standard library only: a minimal WebSocket client."""
import base64, json, os, socket, struct, sys, time, urllib.request

port, out = int(sys.argv[1]), sys.argv[2]
deadline = time.time() + 30
pages = []
while time.time() < deadline:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
            pages = [p for p in json.load(r) if p.get("type") == "page"]
        if pages:
            break
    except OSError:
        pass
    time.sleep(0.5)
if not pages:
    sys.exit("cdp-screenshot: no page on the DevTools port")
path = pages[0]["webSocketDebuggerUrl"].split(str(port), 1)[1]
s = socket.create_connection(("127.0.0.1", port), timeout=30)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
buf = b""
while b"\r\n\r\n" not in buf:
    buf += s.recv(4096)
head, buf = buf.split(b"\r\n\r\n", 1)
if b" 101 " not in head.split(b"\r\n")[0]:
    sys.exit("cdp-screenshot: websocket handshake refused: " + head.decode(errors="replace"))

def read(n):
    global buf
    while len(buf) < n:
        chunk = s.recv(1 << 20)
        if not chunk:
            sys.exit("cdp-screenshot: connection closed")
        buf += chunk
    data, buf = buf[:n], buf[n:]
    return data

def send(msg):
    data = json.dumps(msg).encode()
    mask = os.urandom(4)
    n = len(data)
    hdr = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else bytes([0x80 | 127]) + struct.pack(">Q", n))
    s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

def message():
    payload = b""
    while True:
        b0, b1 = read(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", read(8))[0]
        payload += read(n)
        if b0 & 0x80:
            return json.loads(payload)

send({"id": 1, "method": "Page.captureScreenshot", "params": {"format": "png"}})
while True:
    m = message()
    if m.get("id") == 1:
        break
if "error" in m:
    sys.exit(f"cdp-screenshot: {m['error']}")
with open(out, "wb") as f:
    f.write(base64.b64decode(m["result"]["data"]))
