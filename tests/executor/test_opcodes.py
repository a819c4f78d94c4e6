"""Every opcode of the running interpreter has a handler for this version or an explicit
"unsupported" with a reason; every handler states the versions it serves."""
import dis
import sys

from pydynamo.executor import translator as T


def test_every_opcode_handled_or_explicitly_unsupported():
    missing, handled = T.coverage(sys.version_info)
    assert missing == [], f"opcodes with neither handler nor explicit 'unsupported': {missing}"
    assert len(handled) > 60


def test_handlers_state_their_versions():
    for name, h in T.HANDLERS.items():
        assert h.versions, name
        assert set(h.versions) <= {(3, 11), (3, 12)}, (name, h.versions)
        # each handler is a real opcode of at least one version it claims (no typos)
        if tuple(sys.version_info[:2]) in h.versions:
            assert name in dis.opmap, name


def test_unsupported_have_reasons():
    for name, reason in T.UNSUPPORTED.items():
        assert reason and isinstance(reason, str), name
