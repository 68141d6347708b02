"""The seed workload on two real TensorFlow workers: Keras ``fit``, templates, failure reports,
TensorFlow's other roles (``--ps``, ``--chief``, ``--evaluator``), experiments, lessons.

Marker: ``tf``.
Needs: ``tensorflow-cpu``, ``tf-keras``.
"""
