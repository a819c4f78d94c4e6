"""Log channels on top of `logging`: PYDYNAMO_LOGS=graph_breaks,recompiles,guards,graph_code,...

`get(channel)` returns the logger `pydynamo.<channel>`; a channel named in config.logs (the names
are config.LOG_CHANNELS; "all" names every one; an unknown name warns) logs at INFO to stderr.
A channel is also on when its logger is enabled for DEBUG by the program's own logging setup.
`enabled(channel)` is a cheap test so callers skip formatting when off.
"""
from __future__ import annotations

import logging

from pydynamo import config

_configured: set[str] = set()


def enabled(channel: str) -> bool:
    return channel in config.log_channels(config.logs) or \
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
