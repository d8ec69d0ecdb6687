# Sourced by gpu_check.sh and gpu_measure.sh on a lent GPU machine: installs what gpu_prepare.sh
# put into the carried folders into /tmp/site and puts it on PYTHONPATH.
#   .whl/            the app's wheels the image lacks
#   .ray-a/, .ray-b/ Ray's wheel in two halves with its missing needs (RAY=1 gpu_prepare.sh):
#                    74 MB, more than one call carries, so two calls bring a half each (the
#                    machine keeps an ignored folder between calls while it stays warm)
# Returns non-zero when an install fails, or when only one half of Ray is there.
gpu_site() {
  local wheels=() part name
  [ -d .whl ] && wheels+=(.whl/*.whl)
  if [ -d .ray-a ] || [ -d .ray-b ]; then
    part=$(ls .ray-b/*.whl.1 2>/dev/null) && name=$(basename "$part" .1) && [ -f ".ray-a/$name.0" ] \
      || { echo "Ray's wheel is in halves: carry .ray-a in one call, then .ray-b in the next" >&2; return 1; }
    cat ".ray-a/$name.0" "$part" > "/tmp/$name" || return 1
    wheels+=("/tmp/$name" .ray-b/*.whl)
  fi
  [ ${#wheels[@]} -eq 0 ] && return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "${wheels[@]}" || return 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
}
