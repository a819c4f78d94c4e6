"""Log channels on top of `logging`: PYDYNAMO_LOGS=graph_breaks,recompiles,guards,graph_code,...

`get(channel)` returns the logger `pydynamo.<channel>`; a channel named in config.logs logs at
INFO to stderr. `enabled(channel)` is a cheap test so callers skip formatting when off.
"""
from __future__ import annotations

import logging

from pydynamo import config

_configured: set[str] = set()


def enabled(channel: str) -> bool:
    return channel in (c.strip() for c in config.logs.split(",")) or \
        logging.getLogger(f"pydynamo.{channel}").isEnabledFor(logging.DEBUG)


def get(channel: str) -> logging.Logger:
    log = logging.getLogger(f"pydynamo.{channel}")
    if channel not in _configured and enabled(channel):
        _configured.add(channel)
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(f"[pydynamo.{channel}] %(message)s"))
        log.addHandler(handler)
        if log.level == logging.NOTSET or log.level > logging.INFO:
            log.setLevel(logging.INFO)   # never raise a level someone set lower (DEBUG)
    return log


def log(channel: str, msg: str, *args) -> None:
    if enabled(channel):
        get(channel).info(msg, *args)
