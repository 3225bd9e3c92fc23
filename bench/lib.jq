# bench/lib.jq: jq definitions the bench scripts share (`jq -L bench 'include "lib"; ...'`).
# median: of an array of numbers; the mean of the middle two when its length is even.
def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
