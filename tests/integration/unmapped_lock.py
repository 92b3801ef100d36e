"""The in-house lock without its error mapping: redis-py's exceptions go through as they
are, so lockcheck records them as info and the summary says the client maps none."""

from example_lock import clients_of, inhouse


class Unmapped(inhouse.InhouseLock):
    def _do(self, command):
        return command()  # the mistake: no Definite/Indefinite


def make_clients(config, keys, opts):
    return clients_of(Unmapped, config, keys, opts)
