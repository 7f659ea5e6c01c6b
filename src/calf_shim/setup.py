
from setuptools import find_packages, setup

PACKAGE = 'calf_shim'

setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    data_files=[
        ('share/ament_index/resource_index/packages', [f'resource/{PACKAGE}']),
        (f'share/{PACKAGE}', ['package.xml']),
    ],
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='CALF developers',
    maintainer_email='calf@example.org',
    description='The shim: relays that impair live traffic (CALF topics or any topic), and trace recording.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'shim_node = calf_shim.shim_node:main',
            'generic_shim_node = calf_shim.generic_shim_node:main',
            'trace_recorder = calf_shim.trace_recorder_node:main',
        ],
    },
)
