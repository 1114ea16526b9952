rm -rf /tmp/prof/cache; JAXDP_CACHE_DIR=/tmp/prof/cache PYTHONPATH=/work/main python /tmp/prof/block.py
