"""What the Arduino library specification (1.5) allows in library.properties, for the tests of the
generic library (arduino_lib/) and of `export --bundle arduino`."""

import re

CATEGORIES = {
    "Display",
    "Communication",
    "Signal Input/Output",
    "Sensors",
    "Device Control",
    "Timing",
    "Data Storage",
    "Data Processing",
    "Other",
}
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
