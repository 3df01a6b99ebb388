"""What is said when no entry of the catalog applies: the class and the hint of `unknown`. Apart from the
catalog, so that a `Cause` (which every finding may carry) is defined without compiling the catalog."""

UNKNOWN_KIND = "unknown"
UNKNOWN_HINT = (
    "No known cause was found in the output: read the lines above the crash (kubectl logs --previous), "
    "from the first error down."
)
