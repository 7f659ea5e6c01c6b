
from setuptools import find_packages, setup

PACKAGE = 'calf_env'

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
    description='Gymnasium environments behind a real-time stepper, the env node and the adapter env node.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'env_node = calf_env.env_node:main',
            'adapter_env_node = calf_env.adapter_env_node:main',
        ],
    },
)
