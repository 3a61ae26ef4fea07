"""Files that the verl patcher (``verl_patch``) copies into a patched verl tree.

Importing this package must not need torch: the patcher reads the files of
this package as data (``pkgutil.get_data``) on machines that may have no
torch at all. ``bert_padding`` itself needs torch and is imported only by the
patched verl, as ``verl._pascal_compat.bert_padding``.
"""
