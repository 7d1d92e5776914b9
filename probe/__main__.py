from probe.app.cli import main

main()
