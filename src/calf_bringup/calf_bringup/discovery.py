"""Fast DDS static-peers profiles: discovery by unicast to listed addresses, for Wi-Fi without multicast.

``config/fastdds_static_peers.xml`` is both a usable profile (edit its example addresses) and the
template that ``write_static_peers`` fills with the addresses of ``discovery:=peers:A,B``. Written
profiles are named after their content, so every node of a machine shares one file and writing it
again changes nothing.
"""
from __future__ import annotations

import hashlib
import ipaddress
import os
import stat
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from ament_index_python.packages import (
    PackageNotFoundError,
    get_package_share_directory,
)

from calf_core import atomic
from calf_core.errors import ConfigError

PEERS_PREFIX = 'peers:'
TEMPLATE_NAME = 'fastdds_static_peers.xml'
LOCALHOST = '127.0.0.1'
FASTDDS_NS = 'http://www.eprosima.com'


def parse_peers(text: str) -> tuple[str, ...]:
    """The IPv4 addresses of ``A,B,...``, in order, without repeats; ConfigError names a bad one."""
    peers = [part.strip() for part in text.split(',') if part.strip()]
    if not peers:
        raise ConfigError(f'no peer addresses in {text!r}: give {PEERS_PREFIX}ADDRESS[,ADDRESS...]')
    for peer in peers:
        try:
            ipaddress.IPv4Address(peer)
        except ValueError:
            raise ConfigError(f'peer {peer!r} is not an IPv4 address (for example 192.168.1.10)') from None
    return tuple(dict.fromkeys(peers))


def render_static_peers(peers: Sequence[str], template: str) -> str:
    """``template`` with its initial peers replaced by 127.0.0.1 (this machine's nodes) and ``peers``."""
    ET.register_namespace('', FASTDDS_NS)
    root = ET.fromstring(template, parser=ET.XMLParser(target=ET.TreeBuilder(insert_comments=True)))
    peer_list = root.find(f'.//{{{FASTDDS_NS}}}initialPeersList')
    if peer_list is None:
        raise ConfigError('the Fast DDS template has no initialPeersList')
    peer_list.clear()
    for address in dict.fromkeys((LOCALHOST, *peers)):
        locator = ET.SubElement(peer_list, f'{{{FASTDDS_NS}}}locator')
        udp = ET.SubElement(locator, f'{{{FASTDDS_NS}}}udpv4')
        ET.SubElement(udp, f'{{{FASTDDS_NS}}}address').text = address
    ET.indent(root)
    return ET.tostring(root, encoding='unicode', xml_declaration=True) + '\n'


def write_static_peers(peers: Sequence[str], directory: Path | None = None) -> Path:
    """Write the profile for ``peers`` into ``directory`` (default: ``private_dir()``); its path."""
    text = render_static_peers(peers, template_path().read_text(encoding='utf-8'))
    directory = directory or private_dir()
    path = directory / f'fastdds_static_peers-{hashlib.sha256(text.encode()).hexdigest()[:12]}.xml'
    if not (path.is_file() and path.read_text(encoding='utf-8') == text):
        directory.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, text)  # a node starting meanwhile never reads half a file
    return path


def private_dir() -> Path:
    """This user's directory for generated DDS profiles, created 0700; ConfigError if it is not private.

    ``$XDG_RUNTIME_DIR/calf`` when the session has a runtime dir, else ``<tmp>/calf-<uid>``. An existing
    directory is used only if it is a real directory (not a symlink) owned by this user that no one else
    could write into; it is then closed to group and others, since the profiles it holds decide whom the
    nodes talk to.
    """
    runtime = os.environ.get('XDG_RUNTIME_DIR', '')
    if runtime and _is_private(Path(runtime)):
        path = Path(runtime) / 'calf'
    else:
        path = Path(tempfile.gettempdir()) / f'calf-{os.getuid()}'
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as err:
        raise ConfigError(f'cannot create {str(path)!r}: {err.strerror}') from None
    if _is_own_dir(path) and not os.lstat(path).st_mode & 0o022:
        os.chmod(path, 0o700)  # readable by others (earlier versions made it 0755), yet only we wrote into it
    if not _is_private(path):
        raise ConfigError(f'{str(path)!r} is not a private directory of this user (a symlink, another owner, or '
                          f'open to group or others): remove it, or set XDG_RUNTIME_DIR')
    return path


def _is_own_dir(path: Path) -> bool:
    """Is ``path`` a directory (not a symlink) owned by this user?"""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()


def _is_private(path: Path) -> bool:
    """Is ``path`` a directory (not a symlink) owned by this user with no group or other access?"""
    return _is_own_dir(path) and not os.lstat(path).st_mode & 0o077


def template_path() -> Path:
    """The shipped profile: in the installed share directory, else in the source tree."""
    try:
        share = Path(get_package_share_directory('calf_bringup'))
    except PackageNotFoundError:
        share = Path(__file__).resolve().parents[1]
    return share / 'config' / TEMPLATE_NAME
