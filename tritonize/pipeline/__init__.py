"""`tritonize build` and `make demo`: the stages in order (`stages.build_all`), nothing else.

Each stage decides for itself whether its outputs are current and says so in its StageResult;
this package only sequences them and shows the results.
"""
