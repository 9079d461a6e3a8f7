from setuptools import find_packages, setup

setup(
    name='mrc-testbed',
    version='0.1.0',
    description='Mininet-based emulation testbed for MRC (Multipath '
                'Reliable Connection) over multi-plane SRv6 fabrics',
    python_requires='>=3.11',
    packages=find_packages(include=['testbed', 'testbed.*']),
    entry_points={'console_scripts': ['mrc-testbed=testbed.cli:main']},
)
