"""STAND-IN artifacts for what CI cannot download (test tooling, never used on a box).

``verl-pascal-standins [OUT]`` (``build``) makes, from ``scripts/standins/``:
a CUDA 11.8 runfile (a makeself archive honouring the real installer's
flags), a cuDNN tarball with the real layout, a Miniforge installer whose
conda runs on the container's python3, an apex source archive with tiny real
C extensions, the real torch CPU wheel with its dependencies as a PEP 503
index, and a stand-in nvidia-smi. Every file name comes from the lock's
artifact registry; the mirror's records and index pages are written by the
same code as ``verl-pascal-prefetch`` writes them with.
"""
