"""What runs write and read back: CSV/SDF export (``export``), the resume journal (``journal``), projects
(``project``) and fingerprint posteriors (``posteriors``).

May import: ``engine.insight`` and below.
"""
