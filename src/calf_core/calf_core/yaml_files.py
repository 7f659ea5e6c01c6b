"""Reading CALF's YAML and JSON files: one place, so that every file gets the same bounds and one-line errors.

Every file is read with a size limit before it is parsed, and only if it is a regular file (a pipe
or a device is refused at once, before any read could block). YAML goes through a safe loader that
refuses deep nesting and documents whose aliases expand past a node budget (alias "bombs"); JSON
is checked for the same nesting depth. ``read_document`` reads a file that may be either: JSON (a
YAML subset) is parsed by the fast JSON parser, YAML only up to a smaller size, since the YAML
parser takes seconds per megabyte. A violated bound is a one-line ConfigError naming the file,
which never quotes the file's content.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from calf_core.errors import ConfigError

MAX_FILE_BYTES = 4 * 1024 * 1024
"""Largest YAML or JSON file CALF reads (profiles, relay and adapter configs, checkpoint meta)."""
MAX_DEPTH = 32
"""Deepest nesting of mappings and lists a file may have."""
MAX_NODES = 200_000
"""Most scalars, lists and mappings a YAML document may expand to, aliases counted at each use."""


def read_yaml(path: Path, what: str, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """Parse a YAML file within the bounds; any problem is a one-line ConfigError naming `what`."""
    text = _read_text(Path(path), what, max_bytes)
    return parse_yaml(text, f'{what} {str(path)!r}')


def parse_yaml(text: str, where: str) -> Any:
    """Parse YAML text within the depth and node bounds; `where` names the source in errors."""
    loader = None
    try:
        loader = _BoundedLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, where)
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        raise ConfigError(f'{where} is not valid YAML: {_describe(err)}') from None
    except _TooDeep:
        raise ConfigError(f'{where} nests deeper than {MAX_DEPTH} levels: flatten it') from None
    except RecursionError:
        raise ConfigError(f'{where} nests too deeply: flatten it') from None
    except (TypeError, ValueError) as err:  # e.g. an unhashable mapping key
        raise ConfigError(f'{where} is not valid YAML: {_one_line(err)}') from None
    finally:
        if loader is not None:
            loader.dispose()


def read_json(path: Path, what: str, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """Parse a JSON file within the size and depth bounds; any problem is a one-line ConfigError."""
    return parse_json(_read_text(Path(path), what, max_bytes), f'{what} {str(path)!r}')


def read_document(path: Path, what: str, max_bytes: int, max_yaml_bytes: int) -> Any:
    """Parse a file of up to `max_bytes` that is one JSON object, or YAML of up to `max_yaml_bytes`.

    A document starting with ``{`` is tried as JSON first; if it is not JSON it is read as YAML
    (a flow mapping), within the YAML bound. One-line ConfigErrors naming `what`.
    """
    where = f'{what} {str(path)!r}'
    text = _read_text(Path(path), what, max_bytes)
    if text.lstrip().startswith('{'):
        try:
            return parse_json(text, where)
        except ConfigError:
            if len(text) > max_yaml_bytes:
                raise
    if len(text) > max_yaml_bytes:
        raise ConfigError(f'{where} is {len(text)} characters of YAML, more than the {max_yaml_bytes} read as '
                          f'YAML: write a larger {what} as one JSON object (JSON is read up to {max_bytes} bytes)')
    return parse_yaml(text, where)


def parse_json(text: str, where: str) -> Any:
    """Parse JSON text within the depth bound, refusing NaN and Infinity; `where` names the source."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ConfigError(f'{where} nests too deeply: flatten it') from None
    except ValueError as err:  # JSONDecodeError, and ints longer than Python converts
        raise ConfigError(f'{where} is not valid JSON: {_one_line(err)}') from None
    if _depth(value) > MAX_DEPTH:
        raise ConfigError(f'{where} nests deeper than {MAX_DEPTH} levels: flatten it')
    return value


def _read_text(path: Path, what: str, max_bytes: int) -> str:
    """The regular file's UTF-8 text, refusing more than `max_bytes` without reading them all."""
    try:  # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as err:
        raise ConfigError(f'cannot read {what} {str(path)!r}: {err.strerror or type(err).__name__}') from None
    try:
        with os.fdopen(fd, 'rb') as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(f'cannot read {what} {str(path)!r}: not a regular file (a directory, pipe or '
                                  f'device): give a file')
            data = b'' if info.st_size > max_bytes else stream.read(max_bytes + 1)  # the size, then the bytes
    except OSError as err:
        raise ConfigError(f'cannot read {what} {str(path)!r}: {err.strerror or type(err).__name__}') from None
    if info.st_size > max_bytes or len(data) > max_bytes:
        raise ConfigError(f'{what} {str(path)!r} is larger than {max_bytes} bytes: not a {what}, or split it')
    try:
        return data.decode('utf-8')
    except UnicodeDecodeError as err:
        raise ConfigError(f'{what} {str(path)!r} is not UTF-8 text (byte {err.start}): not a {what}') from None


class _TooDeep(Exception):
    """Raised inside the composer when nesting passes MAX_DEPTH."""


class _BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader that stops composing past MAX_DEPTH nested collections."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_expansion(root: yaml.Node, where: str) -> None:
    """Refuse a document whose nodes, each alias counted at every use, exceed MAX_NODES."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node, depth: int) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if depth > MAX_DEPTH:  # a recursive alias (&a [*a]) never ends
            raise _TooDeep
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(key, depth + 1) + size(value, depth + 1) for key, value in node.value)
        sizes[id(node)] = min(total, MAX_NODES + 1)
        return sizes[id(node)]

    if size(root, 0) > MAX_NODES:
        raise ConfigError(f'{where} expands to more than {MAX_NODES} values through its aliases: '
                          f'remove the aliases (&name / *name) that repeat large parts')


def _depth(value: Any) -> int:
    """Nesting depth of lists and dicts, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _no_constant(name: str) -> Any:
    """JSON's NaN and Infinity are not JSON: refuse them."""
    raise ValueError(f'{name} is not a JSON number')


def _describe(err: yaml.YAMLError) -> str:
    """The problem and its line and column, without PyYAML's quote of the offending text."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem:
        mark = err.problem_mark
        where = f' at line {mark.line + 1}, column {mark.column + 1}' if mark is not None else ''
        return f'{" ".join(err.problem.split())}{where}'
    if isinstance(err, yaml.reader.ReaderError):
        return f'unacceptable character #x{err.character:04x} at position {err.position}'
    return _one_line(err)


def _one_line(err: BaseException) -> str:
    """An exception's message on one line."""
    return ' '.join(str(err).split()) or type(err).__name__
