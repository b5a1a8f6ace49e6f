"""fabflow.Node: a server in this process, clients started as processes of their own
(examples/python/service.py) whenever they like; a client killed mid-session is a
fabflow.PeerError on the server, whose next client is served all the same."""

import importlib.util
import os
import subprocess
import sys
import threading
import unittest

from .fabflow_under_test import REPO, fabflow

EXAMPLE = os.path.join(REPO, "examples", "python", "service.py")


def load_example():
    spec = importlib.util.spec_from_file_location("fabflow_service_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@unittest.skipIf(fabflow is None, "no fabflow module built")
class NodeTest(unittest.TestCase):
    def client(self, address, *args):
        env = dict(os.environ, FABFLOW_SECRET="node-test",
                   PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(fabflow.__file__))))
        return subprocess.Popen([sys.executable, EXAMPLE, "connect", address, *args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def test_clients_come_and_go_and_a_killed_one_is_a_peer_error(self):
        service = load_example()
        for provider in ("local", "tcp"):
            node = fabflow.Node(secret="node-test", timeout=2.0)
            address = node.listen("127.0.0.1:0")
            small = ("-p", provider, "-n", "3000", "-m", "200", "-b", "300000")
            for _ in range(2):  # one after the other, against the same server
                c = self.client(address, *small)
                rank = node.accept(timeout=30, rank=1)
                self.assertIsNotNone(rank, provider)
                line = service.serve_one(rank, provider)
                out, err = c.communicate(timeout=30)
                self.assertEqual(c.returncode, 0, err)
                self.assertEqual(out.strip(), line, provider)
                self.assertTrue(line.startswith("3000 items in order"), line)
                del rank
            victim = self.client(address, "-p", provider, "-n", str(10**9))
            rank = node.accept(timeout=30, rank=1)
            self.assertIsNotNone(rank, provider)
            threading.Timer(1.0, victim.kill).start()
            with self.assertRaisesRegex(fabflow.PeerError, "rank 0 vanished"):
                service.serve_one(rank, provider)
            victim.wait(timeout=10)
            del rank
            self.assertIsNone(node.accept(timeout=0.2))  # nobody else came
            self.assertEqual(node.refused, 0)

    def test_bad_input_is_one_clear_error(self):
        with self.assertRaisesRegex(fabflow.Error, "node: address 'nowhere'"):
            fabflow.Node(secret="s").listen("nowhere")
        with self.assertRaisesRegex(fabflow.Error, "timeout must be"):
            fabflow.Node(secret="s", timeout=0)
        with self.assertRaisesRegex(fabflow.Error, "nothing answers at 127.0.0.1:1"):
            fabflow.Node(secret="s").connect("127.0.0.1:1", timeout=0.3)
        self.assertTrue(issubclass(fabflow.PeerError, fabflow.Error))


if __name__ == "__main__":
    unittest.main()
