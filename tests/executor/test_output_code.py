"""The output code (executor/reconstruct.py): generated source compiled to the replacement code
object. Its source and disassembly reach the logs, tracebacks and debuggers show its lines, and
it rebuilds the return value and replays side effects after the graph."""
import linecache
import logging

import torch

import pydynamo
from pydynamo import _C, config


def f(x, lst, obj):
    y = x.sin() + 1
    lst.append(y)
    obj.last = y * 2
    return {"a": y, "b": [y, 2, "s"]}, lst


class Obj:
    pass


def test_logs_show_source_and_disassembly(cnt, caplog, monkeypatch):
    monkeypatch.setattr(config, "logs", "output_code,bytecode,graph_code")
    with caplog.at_level(logging.INFO, logger="pydynamo"):
        x, lst, obj = torch.randn(3), [], Obj()
        out, lst_out = pydynamo.optimize(f, backend=cnt)(x, lst, obj)
    msgs = {r.name: r.getMessage() for r in caplog.records}
    src = msgs["pydynamo.output_code"]
    assert "def __pydynamo_transformed(x, lst, obj):" in src and "return " in src
    assert "__pydynamo_out = " in src  # the graph call
    dis_text = msgs["pydynamo.bytecode"]
    assert "replaced by:" in dis_text and "RETURN_VALUE" in dis_text and "LOAD_FAST" in dis_text
    assert "sin" in msgs["pydynamo.graph_code"]
    # the rebuilt value and the replayed side effects, against eager
    ref_lst, ref_obj = [], Obj()
    ref, _ = f(x, ref_lst, ref_obj)
    torch.testing.assert_close(out["a"], ref["a"])
    assert out["b"][1:] == [2, "s"] and out["b"][0] is out["a"]
    assert lst_out is lst and len(lst) == 1 and lst[0] is out["a"]
    torch.testing.assert_close(obj.last, ref_obj.last)
    assert cnt.count == 1


def test_replacement_lines_resolve_to_generated_source(cnt):
    opt = pydynamo.optimize(f, backend=cnt)
    opt(torch.randn(3), [], Obj())
    (_, code), = _C.get_cache_entries(f.__code__)
    assert code is not f.__code__ and code.co_filename.startswith("<pydynamo transformed f from ")
    assert code.co_firstlineno == f.__code__.co_firstlineno
    lines = {ln for _, _, ln in code.co_lines() if ln is not None}
    text = {ln: linecache.getline(code.co_filename, ln).strip() for ln in lines}
    assert all(text.values()), text  # every line number of the code names a generated line
    assert any(t.startswith("__pydynamo_out = ") for t in text.values())
    assert any(t.startswith("return ") for t in text.values())
