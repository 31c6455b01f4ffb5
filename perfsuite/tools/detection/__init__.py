"""``perfsuite selftest``: what a green run rules out, measured on the user's own runner.

A slowdown of a known size is planted in a real pipeline (``plant``: more of the same work in whole
units, checked against its nominal size before any rate is read from it) and each path a user relies
on judges it as that user's run does:

* ``gates``: the same-run gate of ratios.yaml on the planted loader (``gates_path``);
* ``saved``: the comparison with saved runs, every run a separate fresh process (``saved_path``);
* ``ab``: ``perfsuite ab`` with its defaults on a planted revision (``ab_path``).

For each path and planted share (0, 5, 10, 20 and 40 %) the share of trials flagged, with its
interval, and the smallest slowdown caught at least 95 % of the time (``curve``). Records in
``records``, the table and plot in ``present``, the command line in ``command``, the fresh processes'
own loop in ``worker``. The design and how to read the table: docs/selftest.md.
"""
