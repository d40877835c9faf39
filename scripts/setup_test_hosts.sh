#!/usr/bin/env bash
# Installs what the multi-host tests need (run as root on a Debian/Ubuntu test machine):
#   openssh-server  - tests/test_ssh_launcher.py starts its own sshd instances on 127.0.0.1
#                     (and in network namespaces) with throw-away keys; nothing is enabled
#                     as a system service by this script
#   openssh-client  - the launcher itself runs `ssh`
#   iproute2        - `ip netns` / veth pairs for the two-namespace test
# Tests skip with the reason when these are missing; .ci/run never installs them.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "run as root (apt-get)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends openssh-server openssh-client iproute2
# sshd refuses to start without its privilege separation directory.
mkdir -p /run/sshd
echo "ready: $(command -v sshd || echo /usr/sbin/sshd), $(ssh -V 2>&1), $(ip -V)"
