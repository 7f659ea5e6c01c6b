
from setuptools import find_packages, setup

PACKAGE = 'calf_agent'

setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    data_files=[
        ('share/ament_index/resource_index/packages', [f'resource/{PACKAGE}']),
        (f'share/{PACKAGE}', ['package.xml']),
    ],
    install_requires=['setuptools', 'zstandard>=0.22'],
    zip_safe=True,
    maintainer='CALF developers',
    maintainer_email='calf@example.org',
    description='Policies, PPO training, checkpoints and the policy node.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'policy_node = calf_agent.nodes.policy_node:main',
            'adapter_policy_node = calf_agent.nodes.adapter_policy_node:main',
            'arbiter_node = calf_agent.nodes.arbiter_node:main',
            'learner_node = calf_agent.dist.learner_node:main',
            'worker_node = calf_agent.dist.worker_node:main',
        ],
    },
)
