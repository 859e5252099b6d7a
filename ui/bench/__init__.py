"""The GPU benchmark panel's views: settings, run and sweep tabs, charts, tables.

Every measurement, the GPU lock, the memory estimate, the results' checks and the run store
live in ``gpu.bench``; these modules draw what it returns and hand back the user's choices.
"""
