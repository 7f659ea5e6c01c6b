"""calf_core for colcon (ament_python) and for pip (``pip install src/calf_core``, see pyproject.toml)."""
import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

PACKAGE = 'calf_core'
MSG_SOURCE = Path(__file__).resolve().parent.parent / 'calf_msgs' / 'msg'


class BuildWithMessages(build_py):
    """Packs calf_msgs' .msg files into calf_core/msg of a wheel, so that trace bags decode without ROS."""

    def run(self) -> None:
        super().run()
        if MSG_SOURCE.is_dir():
            target = Path(self.build_lib) / PACKAGE / 'msg'
            target.mkdir(parents=True, exist_ok=True)
            for msg in MSG_SOURCE.glob('*.msg'):
                shutil.copy2(msg, target / msg.name)


setup(
    name=PACKAGE.replace('_', '-'),
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    package_data={PACKAGE: ['networks/*.yaml', 'tasks/*.yaml']},
    data_files=[
        ('share/ament_index/resource_index/packages', [f'resource/{PACKAGE}']),
        (f'share/{PACKAGE}', ['package.xml']),
    ],
    python_requires='>=3.10',
    install_requires=['numpy>=1.26', 'gymnasium>=1.0,<2', 'PyYAML>=6', 'rosbags>=0.10', 'mcap>=1.1'],
    extras_require={'plot': ['matplotlib>=3.7'], 'mujoco': ['gymnasium[mujoco]>=1.0,<2'],
                    'examples': ['stable-baselines3>=2.3', 'torch>=2.2']},
    cmdclass={'build_py': BuildWithMessages},
    zip_safe=True,
    maintainer='CALF developers',
    maintainer_email='calf@example.org',
    description='The pure core of CALF, with no ROS dependency: timing rules, tasks, network models and profiles, traces, and the virtual-time NetworkedEnv.',
    license='Apache-2.0',
)
