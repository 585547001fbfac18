import json
from tests.fakes.llm import Reply, Usage, text, shell, write_file, reasoning
from tests.real.conftest import *  # noqa

def test_plain(real, adapter):
    srv = real.use(adapter, [Reply([reasoning("hmm"), text("Hello.")], Usage(460, 200, 30, 7, 5))])
    sid = real.spawn("say hello", adapter)
    d = real.wait(sid)
    print(json.dumps(d, indent=1))
    print(real.stderr(sid))
    print(real.steps(sid))

def test_shell(real, adapter):
    srv = real.use(adapter, [Reply([shell("echo fine")]), Reply([shell("echo bad; exit 3")]), Reply([text("Both ran.")])])
    sid = real.spawn("run", adapter)
    d = real.wait(sid)
    print(d["status"], d["error"])
    print(real.stderr(sid)[-3000:])
    for s in real.steps(sid): print(s)
    print(len(srv.requests))
