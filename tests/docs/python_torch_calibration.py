# docs/python.md's calibration block (python_torch_calibration), run in a scratch folder whose
# examples/ is the repository's: it must write the plan committed beside the trained model.
import os
import sys
import tempfile

source = os.environ["RAZORKV_SOURCE_DIR"]
sys.path.insert(0, os.path.join(source, "tools", "train"))
scratch = tempfile.mkdtemp()
os.symlink(os.path.join(source, "examples"), os.path.join(scratch, "examples"))
os.chdir(scratch)

# @snippet

committed = razorkv.load_plan(os.path.join(source, "examples/engine/model/plan.json"))
written = razorkv.load_plan("plan.json")
assert (written.retrieval_mask == committed.retrieval_mask).all(), (written.retrieval_mask,
                                                            committed.retrieval_mask)
print("python_torch_calibration: the committed plan")
