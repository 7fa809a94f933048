#!/usr/bin/env python3
"""Peak memory of `mrguard serve` per request (BENCHMARKS.md, "Memory per
request"): starts the given binary with --self-signed, sends ONE review of
about MIB MiB whose object is mostly arrays of small numbers (the worst
shape for a JSON tree) to PATH, and prints VmHWM before and after, and the
amplification (peak over idle, per byte of body).

    scripts/memory-per-request.py target/release/mrguard 7 /validate
"""
import http.client, json, os, re, socket, ssl, subprocess, sys, tempfile, time

binary, mib, path = sys.argv[1], float(sys.argv[2]), sys.argv[3]
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
review = json.load(open(os.path.join(
    root, "tests/fixtures/reviews/002_validate_CREATE_VPC_sample-vpc.json")))
row = list(range(10)) * 10
row_len = len(json.dumps(row, separators=(",", ":"))) + 1
review["request"]["object"]["spec"]["forProvider"]["data"] = [row] * int(mib * 1024 * 1024 // row_len)
body = json.dumps(review, separators=(",", ":")).encode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


port, metrics = free_port(), free_port()
ca = os.path.join(tempfile.mkdtemp(), "ca.crt")
p = subprocess.Popen([binary, "serve", "--self-signed", "--listen", f"127.0.0.1:{port}",
                      "--metrics-listen", f"127.0.0.1:{metrics}", "--self-signed-ca-file", ca],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(100):
        if os.path.exists(ca):
            break
        time.sleep(0.1)
    time.sleep(0.5)

    def hwm():
        status = open(f"/proc/{p.pid}/status").read()
        return int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) * 1024

    idle = hwm()
    c = http.client.HTTPSConnection("localhost", port, timeout=60,
                                    context=ssl.create_default_context(cafile=ca))
    c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    answer = r.read()
    assert r.status == 200, answer[:300]
    peak = hwm()
    mi = 1024 * 1024
    print(f"{path} body {len(body) / mi:.2f} MiB: idle {idle / mi:.0f} MiB, peak {peak / mi:.0f} MiB, "
          f"amplification {(peak - idle) / len(body):.1f}x")
finally:
    p.kill()
    p.wait()
