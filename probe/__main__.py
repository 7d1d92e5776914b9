from probe.cli import main

main()
