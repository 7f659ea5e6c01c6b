from setuptools import find_packages, setup

PACKAGE = 'calf_core'

setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    package_data={PACKAGE: ['networks/*.yaml', 'tasks/*.yaml']},
    data_files=[
        ('share/ament_index/resource_index/packages', [f'resource/{PACKAGE}']),
        (f'share/{PACKAGE}', ['package.xml']),
    ],
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='CALF developers',
    maintainer_email='calf@example.org',
    description='The pure core of CALF, with no ROS dependency: timing rules, tasks, network models and profiles, traces, and the virtual-time NetworkedEnv.',
    license='Apache-2.0',
)
