"""Word count: the first job of the README, run by `make run` until the flagship job lands."""

from slipstream.datastream import StreamExecutionEnvironment

LINES = [
    "to be or not to be",
    "that is the question",
    "whether tis nobler in the mind to suffer",
]


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    counts = (
        env.from_collection(LINES)
        .flat_map(lambda line: line.split())
        .map(lambda word: (word, 1))
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    counts.print()
    print(env.explain())
    result = env.execute("word count")
    print(f"finished in {result.get_net_runtime()} ms")


if __name__ == "__main__":
    main()
