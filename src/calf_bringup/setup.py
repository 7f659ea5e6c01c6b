from glob import glob

from setuptools import find_packages, setup

PACKAGE = 'calf_bringup'

setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    data_files=[
        ('share/ament_index/resource_index/packages', [f'resource/{PACKAGE}']),
        (f'share/{PACKAGE}', ['package.xml']),
        (f'share/{PACKAGE}/config', glob('config/*.yaml') + glob('config/*.xml')),
        (f'share/{PACKAGE}/launch', glob('launch/*.launch.py')),
    ],
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='CALF developers',
    maintainer_email='calf@example.org',
    description='The calf command line, the node graph and its launch files, and the experiment harness.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'calf = calf_bringup.cli:main',
            'eval_monitor_node = calf_bringup.eval_monitor_node:main',
        ],
    },
)
