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
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from ament_index_python.packages import (
    PackageNotFoundError,
    get_package_share_directory,
)

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
    """Write the profile for ``peers`` into ``directory`` (default: this user's ``calf-UID`` temp dir); its path."""
    text = render_static_peers(peers, template_path().read_text(encoding='utf-8'))
    directory = directory or Path(tempfile.gettempdir()) / f'calf-{os.getuid()}'
    path = directory / f'fastdds_static_peers-{hashlib.sha256(text.encode()).hexdigest()[:12]}.xml'
    if not path.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f'.{path.name}.{os.getpid()}')
        partial.write_text(text, encoding='utf-8')
        partial.replace(path)  # atomic: a node starting meanwhile never reads half a file
    return path


def template_path() -> Path:
    """The shipped profile: in the installed share directory, else in the source tree."""
    try:
        share = Path(get_package_share_directory('calf_bringup'))
    except PackageNotFoundError:
        share = Path(__file__).resolve().parents[1]
    return share / 'config' / TEMPLATE_NAME
