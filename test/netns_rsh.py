#!/usr/bin/env python3
"""A stand-in for ssh between the network namespaces of test_multihost.sh.

  netns_rsh.py server ADDRESS PORT      in a host's namespace: run each command sent to ADDRESS:PORT
  netns_rsh.py client HOST PORT CMD...  mpirun's launcher agent: run CMD on HOST, relay its output

Like ssh, the command travels over the network between the "hosts" (the veth pair), and the
client lives as long as that connection does: when the link is cut, the client on mpirun's side
cannot learn that the remote command ended, exactly as an ssh client cannot. (Running the command
with `ip netns exec` from the agent itself would let mpirun see its daemon die through a local
child process, which no real cluster offers.) No keepalive: a cut link leaves the client waiting,
as ssh without ServerAliveInterval waits.
"""
import os, signal, socket, subprocess, sys


def server(address, port):
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # reap finished connections
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((address, port))
    s.listen(16)
    print("listening", flush=True)
    while True:
        conn, _ = s.accept()
        if os.fork() == 0:
            s.close()
            f = conn.makefile("rb")
            cmd = f.readline().decode().rstrip("\n")
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            # the command's output goes back over the connection (as ssh's does)
            rc = subprocess.call(["sh", "-c", cmd], stdin=subprocess.DEVNULL, stdout=conn.fileno(),
                                 stderr=conn.fileno())
            os._exit(rc)
        conn.close()


def client(host, port, argv):
    c = socket.create_connection((host, port))
    c.sendall((" ".join(argv) + "\n").encode())
    out = sys.stdout.buffer
    while True:
        data = c.recv(65536)
        if not data:
            return 0
        out.write(data)
        out.flush()


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) >= 5 and sys.argv[1] == "client":
        sys.exit(client(sys.argv[2], int(sys.argv[3]), sys.argv[4:]))
    else:
        sys.exit(__doc__)
