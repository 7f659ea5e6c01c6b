from setuptools import find_packages, setup

PACKAGE = 'calf_ros'

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
    description="CALF's ROS 2 helpers: node start-up, parameters, QoS, and conversions between numpy and messages.",
    license='Apache-2.0',
)
